"""verifiers (prime-rl's environment format): ``export.py`` writes a method as an installable environment package,
``environment.py`` is that environment (it imports verifiers: loads in ``.venv-verifiers`` only), ``importer.py``
reads ``vf-eval``'s traces back as a workbench run."""
