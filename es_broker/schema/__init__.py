"""A record as rows: the row families (families.py) and the rows each record makes (rows.py), shared
by the history's Parquet segments, the SQL read model, its export and the Spark data source."""
