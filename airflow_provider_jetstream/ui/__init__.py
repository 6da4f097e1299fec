"""What the provider adds to Airflow's web UI: plugins for its api-server."""
