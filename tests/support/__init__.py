"""What the tests share: paths, plans of the templates, CRD validators, chart rendering, fake
clusters and API servers, real training runs. Imported as `support.<module>` (pyproject's pythonpath)."""
