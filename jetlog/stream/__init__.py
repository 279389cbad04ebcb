"""jetlog.stream"""
