"""What training reads: the paper's datasets and CSV or Parquet tables (:mod:`~training.data.datasets`,
:mod:`~training.data.tables`), synthetic surveys (:mod:`~training.data.synthetic`), where the data lives
(:mod:`~training.data.location`), and the bundle's survey and CRS (:mod:`~training.data.site`)."""
