from archsearch.cli import entry

entry()
