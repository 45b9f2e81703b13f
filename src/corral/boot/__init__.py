"""Assembles Corral's processes: the manager app, `corral up` with its supervised local agents,
`corral manager`, `corral agent` and `corral db`.  The only package that wires the layers together
(api, manager, services, store, agent); the CLI hands these commands to it."""
