"""workload"""
