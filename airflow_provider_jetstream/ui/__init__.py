"""What the provider adds to Airflow's web UI, as one plugin (``plugin.py``): the JetStream page (``app.py``)
and the connection form's fixes (``connection_form.py``)."""
