# run_clients.py is a script that tests/test_clients.py runs in a child process
# (SciPy's array API support is switched on before SciPy is imported): the
# doctest collector must not import it into the test process.
collect_ignore = ["run_clients.py"]
