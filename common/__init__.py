"""The ground floor: what every stage uses, and nothing of any stage. The errors rcalab raises on purpose and the
checks of what it writes (`errors`); work run in threads, processes or on a Dask cluster, with its bounds
(`tasks`)."""
