"""What every layer shares: the value types (``types``: ``Passage``, ``Hit``, ``Triple``, ``ToolCall``), the trajectory
record (``trajectory``) and the policy loader (``models``). It imports only ``workbench.util``."""
