# As run at 15:14 UTC on 2026-11-27 after run.sh, on the same start (the
# staged libraries and models in /root/stage and .cache/bench/demo-cs-en):
# paraforge fp32 with four streams against CTranslate2 float16 at four
# batch sizes, three interleaved repeats. Output: head-to-head.txt.
S=/root/stage; X=$S/x; NV=/opt/torch/.venv/lib/python3.12/site-packages/nvidia; export LD_LIBRARY_PATH=$NV/cu13/lib:$NV/cudnn/lib:/usr/local/cuda-13.0/targets/x86_64-linux/lib:$S/nvidia/cublas/lib PYTHONPATH=$X:/tmp/site; export ORT_DYLIB_PATH=$X/onnxruntime/capi/libonnxruntime.so.1.31.1; python3 -c "
import sys,json,subprocess,statistics as st; sys.path.insert(0,'tools'); import bench_nmt as b
s,_=b.held_out_sentences(500); open('/tmp/in.txt','w').write('\n'.join(s)+'\n')
P='$X/paraforge'; M=b.DEMO_CACHE
gen=json.loads((M/'hf'/'generation_config.json').read_text())
ct={n:b.Ct2('ct2-fp16',4,bs,gen['max_length'],'cuda','float16',0) for n,bs in (('ct2-f16-b64',64),('ct2-f16-b128',128),('ct2-f16-b256',256),('ct2-f16-b512',512))}
for c in ct.values(): c.run(s[:64])
pf={'pf-fp32-b64-s4':['--batch-size','64','--streams','4'],'pf-fp32-b128-s4':['--batch-size','128','--streams','4']}
T={k:[] for k in list(pf)+list(ct)}
for r in range(3):
  for k,ex in pf.items():
    o=subprocess.run([P,'translate','--model',str(M/'onnx'),'--beam','12','--threads','0','--device','cuda:0','--timing','--warmup','64','/tmp/in.txt','-o','/tmp/o.txt',*ex],capture_output=True,text=True)
    T[k].append(b.timing_of(o.stderr)['seconds'])
  for k,c in ct.items(): T[k].append(c.run(s)[0])
  print(r,{k:round(v[-1],3) for k,v in T.items()},flush=True)
for k,v in T.items(): print(k,'median',round(st.median(v),3),'s',round(500/st.median(v),1),'sent/s',v)
" 2>&1 | grep -v "Warn\|warn" | tee $OUT/h2h.txt
