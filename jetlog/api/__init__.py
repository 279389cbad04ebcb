"""jetlog.api"""
