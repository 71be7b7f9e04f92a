"""The clouds gpujob rents from, one module each behind `Provider` (base.py): offers,
launch, describe, terminate, list; registry.py names them. Only these modules, the targets
and the CLI compare a cloud's name."""
