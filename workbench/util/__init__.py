"""Small helpers any layer may use: files and hashes (``io``), cache paths (``paths``), thread counts
(``threads``), text hygiene (``textsafe``) and the HTTP server stack the services share (``http_stack``)."""
