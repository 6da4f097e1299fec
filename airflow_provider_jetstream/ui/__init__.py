"""The JetStream page in Airflow's UI: an Airflow plugin (``plugin.py``) with a FastAPI app (``app.py``)."""
