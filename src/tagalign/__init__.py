"""tagalign: GND subject suggestions."""
__version__ = "0.1.0"
