"""Built-in datasets shipped with assay (data files live next to their loaders).

Today: the hand-written diagnostic set v3 (``assay.data.builtin.diagnostic``).
"""
