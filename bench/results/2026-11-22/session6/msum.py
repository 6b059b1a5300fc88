import statistics as st, sys
rows=[]
for l in open(sys.argv[1]):
    if l.startswith('#'): continue
    parts=[x.split() for x in l.split('|')]
    if any(len(p)!=2 for p in parts): continue
    rows.append(tuple(float(x) for p in parts for x in p))
usual=[r for r in rows if 0.14<=r[0]<=0.20]
print(len(rows),"pairs;",len(usual),"with UCX p50 in 0.14-0.20")
for name,sel in (("all",rows),("ucx usual",usual)):
    for lab,i,j in (("gv1/ucx p50",2,0),("gv1/ucx mean",3,1),("gv2/ucx p50",4,0),("gv2/ucx mean",5,1),("gv2p1/ucx p50",6,0),("gv2p1/ucx mean",7,1)):
        rs=[r[i]/r[j] for r in sel]
        print(f"{name:10s} {lab:15s} median ratio {st.median(rs):.2f}  ratio of medians {st.median([r[i] for r in sel])/st.median([r[j] for r in sel]):.2f}  under1.5: {sum(x<=1.5 for x in rs)}/{len(rs)}")
print("medians (all):", [round(st.median([r[i] for r in rows]),3) for i in range(8)])
print("medians (usual):", [round(st.median([r[i] for r in usual]),3) for i in range(8)])
