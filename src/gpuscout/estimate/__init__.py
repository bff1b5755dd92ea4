"""estimate"""
