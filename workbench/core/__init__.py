"""What every layer shares: the trajectory record and the policy loader (``models``)."""
