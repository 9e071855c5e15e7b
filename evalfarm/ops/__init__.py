"""What an operator runs against a farm: the end-to-end demo, the fault drill and the hostile-tenant
drill (each ``python -m evalfarm.ops.<name>``)."""
