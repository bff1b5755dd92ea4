"""Results: the versioned record of a measurement, and comparing records fairly.

`schema` is the result format (shared vocabulary of the bench and the load generator); `store`
reads and writes it atomically; `compare` checks fairness and computes ratios with bootstrap CIs;
`verdict` words the decision; `beside` sets gpuscout's estimate beside a measurement.

May import: `estimator`, `workload`, `hardware` and the leaf modules.
"""
