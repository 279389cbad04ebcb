"""jetlog.transport"""
