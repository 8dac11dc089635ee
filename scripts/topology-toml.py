#!/usr/bin/env python3
"""Writes ordo's TOML topology (docs/TOPOLOGY.md) for NODES nodes named n0, n1, ... (as
`--cluster NODESxG` names them): blocks of BLOCK nodes, switches of SWITCH blocks, spines of
SPINE switches. The topology benchmark: `topology-toml.py 25000 16 8 8 > t25k.toml`."""
import sys


def main():
    if len(sys.argv) != 5:
        sys.exit("usage: topology-toml.py NODES BLOCK SWITCH SPINE > topology.toml")
    n, block, switch, spine = (int(x) for x in sys.argv[1:])
    out = ['levels = ["block", "switch", "spine"]', "[units.block]"]
    nb = (n + block - 1) // block
    for b in range(nb):
        out.append(f'b{b} = "n[{b * block}-{min(n - 1, b * block + block - 1)}]"')
    out.append("[units.switch]")
    ns = (nb + switch - 1) // switch
    for s in range(ns):
        out.append(f's{s} = "b[{s * switch}-{min(nb - 1, s * switch + switch - 1)}]"')
    out.append("[units.spine]")
    for p in range((ns + spine - 1) // spine):
        out.append(f'p{p} = "s[{p * spine}-{min(ns - 1, p * spine + spine - 1)}]"')
    print("\n".join(out))


main()
