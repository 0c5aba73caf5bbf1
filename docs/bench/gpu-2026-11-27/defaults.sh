# Second start of 2026-11-27: the CUDA defaults set after the probe (batch
# 64, four streams) checked as defaults: `translate --device cuda:0` with no
# batch or stream flags against the same setting given explicitly and
# against batch 64 with one stream, interleaved, and the demo job with the
# config's batch_size and streams removed. Staged: the onnxruntime-gpu
# package and the demo graphs (pieces in /root/stage); carried: .gpuM.
S=/root/stage; X=$S/x; mkdir -p $X; cp .gpuP04/* $S/
cat $S/p.* | tar -x -C $S && xz -dc $S/ortpy.tar.xz | tar -x -C $X || { echo "unpack failed"; exit 3; }
mkdir -p .cache/bench/demo-cs-en && xz -dc $S/models.tar.xz | tar -x -C .cache/bench/demo-cs-en || exit 4
xz -dc .gpuM/paraforge.xz > $X/paraforge && chmod +x $X/paraforge || exit 5
NV=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
export LD_LIBRARY_PATH=$NV/cu13/lib:$NV/cudnn/lib:/usr/local/cuda-13.0/targets/x86_64-linux/lib
export ORT_DYLIB_PATH=$X/onnxruntime/capi/libonnxruntime.so.1.31.1
P=$X/paraforge; M=.cache/bench/demo-cs-en/onnx; R=$OUT; REF=docs/bench/gpu-2026-11-27/cpu-fp32-reference.txt
python3 -c "
import sys; sys.path.insert(0,'tools'); import bench_nmt as b; s,_=b.held_out_sentences(500); open('/tmp/in.txt','w').write('\n'.join(s)+'\n')"
{
date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for rep in 0 1 2; do
  for c in "defaults|" "explicit|--batch-size 64 --streams 4" "one-stream|--batch-size 64 --streams 1"; do
    n=${c%%|*}; ex=${c#*|}
    t=$(timeout 60 $P translate --model $M --beam 12 --device cuda:0 --timing --warmup 64 $ex /tmp/in.txt -o /tmp/$n.txt 2>&1 | grep '^{' | tail -1 | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['seconds'], d.get('decoder_calls'))")
    echo "rep $rep $n: $t (seconds, decoder calls); identical to the CPU reference: $(paste -d'\t' /tmp/$n.txt $REF | awk -F'\t' '$1==$2' | wc -l); to the explicit setting: $(paste -d'\t' /tmp/$n.txt /tmp/explicit.txt 2>/dev/null | awk -F'\t' '$1==$2' | wc -l)"
  done
done
echo "== the demo job on cuda:0, fp32 graphs, batch_size and streams from the defaults"
sed -e 's#^dir = .*#dir = ".cache/bench/demo-cs-en/onnx"#' -e '/^batch_size/d' -e '/^streams/d' \
    -e 's#^output = .*#output = "out/demo-gpu2"#' -e 's#^local = .*#local = 1#' pipeline-configs/demo.toml > $R/demo-defaults.toml
( sleep 7; timeout 10 python3 -c "import urllib.request as u; open('$R/metrics2.txt','wb').write(u.urlopen('http://127.0.0.1:9464/metrics').read())" ) > /dev/null 2>&1 &
timeout 80 $P run --config $R/demo-defaults.toml --gpus 0 > $R/demo2-log.txt 2>&1; echo "run rc $?"; tail -2 $R/demo2-log.txt
grep 'sentences_per_second{' $R/metrics2.txt; date -u
} > $R/defaults-log.txt 2>&1; cat $R/defaults-log.txt
