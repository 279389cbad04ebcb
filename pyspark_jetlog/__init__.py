"""Auto-registration of the ``jetlog`` Spark data source.

PySpark imports every top-level module whose name starts with ``pyspark_`` and registers its
``DefaultSource`` under ``DefaultSource.name()``, so after ``pip install jetlog[spark]``
``spark.readStream.format("jetlog")`` works without any ``register()`` call.
"""

from jetlog.spark.source import JetlogDataSource as DefaultSource

__all__ = ["DefaultSource"]
