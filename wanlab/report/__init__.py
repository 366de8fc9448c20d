"""Reports: plots and summaries of an experiment's results."""
