"""jetlog.wire"""
