"""Cost: what a job costs under a provider's billing rules, from an estimate or a measurement.

`billing` prices a job on an offer (increments, minimums, startup, storage, egress, failed
attempts, spot interruptions via `spot`); `pick` ranks offers by the total cost of the whole job;
`measured` prices stored bench results; `load_cost` prices a load test; `calculator` is the plain
product. Prices are opinions computed at report time, never stored in results (docs/cost.md).

May import: `results`, `estimator`, `workload`, `hardware` and the leaf modules.
"""
