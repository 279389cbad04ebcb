"""jetlog.log"""
