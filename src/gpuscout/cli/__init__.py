"""The command line: parse the options, call one `gpuscout.api` function, render with `gpuscout.report`.

May import everything; nothing imports it.
"""
