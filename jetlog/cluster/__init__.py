"""jetlog.cluster"""
