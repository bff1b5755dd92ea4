"""`gpuscout trial`: the fair test run on the rented candidates themselves (launch, check, measure, fetch, tear down).

The engines (`engine.py` is their one interface) only move boxes and files; what runs on every box is one
identical script, and the decision is made here from what came back, with the comparison and pricing the
rest of gpuscout already does.
"""
