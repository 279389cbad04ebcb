"""jetlog.observe"""
