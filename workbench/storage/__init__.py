"""Where runs live on disk: run directories (``runs``), trajectory and feature parquet (``trajectory_store``,
``schema``), SQL over them (``parquet_sql``) and the full-text index over trajectories (``text_index``)."""
