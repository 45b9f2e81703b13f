"""The web UI: server-rendered pages over services/ (the same tenancy and validation as the API),
under /ui/; htmx (vendored in static/) only adds live updates over the event stream."""
