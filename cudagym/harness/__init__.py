"""Code that runs inside evaluation children, started as ``cudagym.harness.<module>`` without the cudagym package's
``__init__`` (``common.launch_arguments``): the same module names as the library imports."""
