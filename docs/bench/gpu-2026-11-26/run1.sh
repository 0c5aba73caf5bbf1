# GPU check of 2026-11-26 (paraforge at HEAD): CUDA path after the engine rewrites.
S=/root/stage; X=$S/x; R=$S/res; mkdir -p $X $R
cp .gpuS3/ort.03 $S/ 2>/dev/null
cat $S/ort.0? | xz -dc | tar -x -C $X || { echo "ort unpack failed"; exit 3; }
xz -dc .gpuS3/bundle.tar.xz | tar -x -C . || { echo "bundle unpack failed"; exit 4; }
NV=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
export LD_LIBRARY_PATH=$NV/cu13/lib:$NV/cudnn/lib:/usr/local/cuda-13.0/targets/x86_64-linux/lib
export ORT_DYLIB_PATH=$X/ort/libonnxruntime.so.1.31.1 PYTHONUNBUFFERED=1
P=$PWD/x/paraforge; IN=.gpuS3/input500.txt; M=.cache/bench/demo-cs-en
exec > >(tee $OUT/log.txt) 2>&1
date -u; nproc; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $P --version
tl() { local tag=$1; shift; local t0=$(date +%s.%N); $P translate --beam 12 --timing "$@" $IN -o $R/$tag.txt 2>$R/$tag.err; local rc=$?; echo "$tag: rc $rc, $(awk "BEGIN{printf \"%.2f\", $(date +%s.%N) - $t0}") s wall; $(tail -3 $R/$tag.err | tr '\n' ' ')"; }
echo "== translations of 500 held-out sentences, beam 12"
tl cpu-fp32-b64 --model $M/onnx --device cpu --threads 16 --batch-size 64
for m in onnx onnx-fp16; do
  tl cuda-$m-b64 --model $M/$m --device cuda:0 --batch-size 64
  tl cuda-$m-b64-perbeam --model $M/$m --device cuda:0 --batch-size 64 --cross-attention-per-beam
  tl cuda-$m-b16 --model $M/$m --device cuda:0 --batch-size 16
  tl cuda-$m-b256-t16k --model $M/$m --device cuda:0 --batch-size 256 --batch-tokens 16384
done
tl cuda-onnx-b64-streams2 --model $M/onnx --device cuda:0 --batch-size 64 --streams 2
echo "== identical lines (of 500) against cuda-onnx-b64"
for f in $R/*.txt; do echo "$(basename $f .txt): $(paste -d'\t' $f $R/cuda-onnx-b64.txt | awk -F'\t' '$1==$2' | wc -l)"; done
echo "== against cpu-fp32-b64"
for f in $R/cuda-*.txt; do echo "$(basename $f .txt): $(paste -d'\t' $f $R/cpu-fp32-b64.txt | awk -F'\t' '$1==$2' | wc -l)"; done
echo "== the demo job on cuda:0"
( sleep 14; python3 -c "import urllib.request as u; open('$R/metrics.txt','wb').write(u.urlopen('http://127.0.0.1:9464/metrics').read()); open('$R/status.json','wb').write(u.urlopen('http://127.0.0.1:9464/status').read())" ) &
timeout 150 $P run --config .gpuS3/demo-gpu.toml --gpus 0 > $R/demo-gpu-log.txt 2>&1; echo "run rc $?"; tail -5 $R/demo-gpu-log.txt
grep -c . $R/metrics.txt; grep 'worker_sentences_per_second\|worker_tokens_per' $R/metrics.txt | head -4; head -c 600 $R/status.json; echo
echo "== bench_nmt --gpu --prepared"
timeout 300 python3 tools/bench/bench_nmt.py --gpu --prepared --paraforge $P 2>&1 | grep -v "Loading weights\|LOAD REPORT\|^Key\|^---\|MISSING\|^Notes\|^- MISSING\|^$"
cp bench-out/nmt-gpu.json $OUT/ 2>/dev/null
tar -czf $OUT/results.tar.gz -C $R .
date -u
