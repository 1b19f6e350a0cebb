# The fixture sources under fixtures/ are named *.py.txt so that pytest never collects or imports them.
collect_ignore_glob = ["fixtures/*"]
