"""Transactional anomalies of Kafka histories (Jepsen's `:txn` ops), after Elle.

A history whose client parts carry `mop` (docs/architecture.md, "History") holds
transactions: the parts sharing a `txn` are one transaction. `ops` reads them back,
`graph` holds the dependency graph and its search (strongly connected components, then a
cycle in each), `analysis` finds the anomalies (G0, G1c and their -process and -realtime
variants, precommitted-read, and what failed and crashed transactions' polls prove),
`exactly_once` judges a consume-transform-produce group's delivery, `draw`
draws a cycle, and `hook` merges the findings into a check's results.
"""
