"""The torch-free core: every formula and every number the lessons print.

Imports neither torch, ipywidgets nor matplotlib (``tests/test_layout.py`` checks it). Modules:
validation (argument checks), units, precision, models, hardware, data (the one loader of the
JSON catalogs in ``course_lib/data/``), formulas (sympy) with codegen and the generated numeric
module, estimator, roofline, caching (the model), prefix_cache, compare, capstone and measurements
(published figures).
"""
