"""Pools `wcetctl --json evaluate` outputs (h*.json: H200, e*.json: embedded, k*.json: contended)
in the current directory into the tables of docs/method.md."""
import json,sys,glob,collections
def load(prefix):
    rows=[]
    for f in sorted(glob.glob(prefix+'*.json')):
        d=json.load(open(f))
        for k in d['kernels']: rows.append(k)
    return rows
def score(pairs):
    n=len(pairs)
    if n==0: return None
    pess=[p['bound_ns']/p['holdout_max_ns']-1 for p in pairs]
    viol=sum(1 for p in pairs if p['bound_ns']<p['holdout_max_ns'])
    worst=max([0]+[-x for x in pess])
    return n, viol, worst*100, sum(pess)/n*100, max(pess)*100
methods=['wcetd','fixed-margin','incremental-margin','minimal-offset','fewest-points','envelope']
for prefix,label in [('h','H200 (132 SMs, 17 sizes), 16 seed pairs'),('e','Embedded (8 TPCs, 8 sizes), 4 seed pairs'),('k','H200 contended (stressor on the other SMs), 4 seed pairs')]:
    rows=load(prefix)
    print(f"\n### {label}\n")
    print("| method | kernels | sizes scored | violations | worst under-prediction | mean pessimism (light tails) | max pessimism (light tails) | mean pessimism (tmatch) |")
    print("|---|---|---|---|---|---|---|---|")
    for m in methods:
        allp=[p for k in rows if k['method']==m for p in k['pairs']]
        light=[p for k in rows if k['method']==m and k['kernel']!='tmatch' for p in k['pairs']]
        heavy=[p for k in rows if k['method']==m and k['kernel']=='tmatch' for p in k['pairs']]
        a=score(allp); l=score(light); h=score(heavy)
        nk=len([k for k in rows if k['method']==m])
        print(f"| {m} | {nk} | {a[0]} | {a[1]} | {a[2]:.1f}% | {l[3]:.1f}% | {l[4]:.1f}% | {h[3]:.1f}% |")
    # per kernel for wcetd
    print(f"\nPer kernel, `wcetd` method (mean over seeds):\n")
    print("| kernel | violations | mean pessimism | max pessimism | laws chosen |")
    print("|---|---|---|---|---|")
    byk=collections.defaultdict(list)
    for k in rows:
        if k['method']=='wcetd': byk[k['kernel']].append(k)
    for kern, ks in byk.items():
        pairs=[p for k in ks for p in k['pairs']]
        s=score(pairs)
        laws=collections.Counter(n.split()[1] for k in ks for n in k['notes'] if n.startswith('law '))
        nolaw=sum(1 for k in ks for n in k['notes'] if n.startswith('no law'))
        lawtxt=', '.join(f"{l} x{c}" for l,c in laws.most_common()) + (f", none x{nolaw}" if nolaw else '')
        print(f"| {kern} | {s[1]} | {s[3]:.1f}% | {s[4]:.1f}% | {lawtxt} |")
