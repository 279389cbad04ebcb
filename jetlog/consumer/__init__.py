"""jetlog.consumer"""
