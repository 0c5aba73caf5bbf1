# GPU run 2 of 2026-11-26: top-k in the decoder graph on CUDA, against CTranslate2.
S=/root/stage; X=$S/x; R=$S/res2; mkdir -p $X $R
cp .gpuS3/ort.03 $S/
cat $S/ort.0? | xz -dc | tar -x -C $X || { echo "ort unpack failed"; exit 3; }
xz -dc .gpuS3/models.tar.xz | tar -x -C . || { echo "models unpack failed"; exit 4; }
xz -dc .gpuS3/paraforge.xz > $X/paraforge && chmod +x $X/paraforge || exit 5
xz -dc $S/ct2models.tar.xz | tar -x -C . || echo "no ct2 models"
cat $S/cublas.* > $S/cublas.whl && python3 -c "
import zipfile,sys; z=zipfile.ZipFile(sys.argv[1]); [z.extract(n, sys.argv[2]) for n in z.namelist() if '.so.12' in n]" $S/cublas.whl $S/cb || echo "no cublas"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $S/ctranslate2-*.whl || echo "no ct2 wheel"
NV=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$NV/cu13/lib:$NV/cudnn/lib:/usr/local/cuda-13.0/targets/x86_64-linux/lib:$S/cb/nvidia/cublas/lib
export ORT_DYLIB_PATH=$X/ort/libonnxruntime.so.1.31.1
P=$X/paraforge; IN=.gpuS3/input500.txt; M=.cache/bench/demo-cs-en
exec > >(tee $OUT/log2.txt) 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import ctranslate2; print('ctranslate2', ctranslate2.__version__, 'cuda devices', ctranslate2.get_cuda_device_count())"
tl() { local tag=$1; shift; local t0=$(date +%s.%N); $P translate --beam 12 --timing "$@" $IN -o $R/$tag.txt 2>$R/$tag.err; local rc=$?; echo "$tag: rc $rc, $(awk "BEGIN{printf \"%.2f\", $(date +%s.%N) - $t0}") s wall; $(tail -3 $R/$tag.err | tr '\n' ' ')"; }
echo "== 500 held-out sentences, beam 12, cuda:0 (threads: all 16 host cores)"
for m in onnx onnx-fp16; do
  tl $m-b64-host --model $M/$m --device cuda:0 --batch-size 64 --top-k-on host
  tl $m-b64-graph --model $M/$m --device cuda:0 --batch-size 64
done
tl onnx-b64-graph-again --model $M/onnx --device cuda:0 --batch-size 64
tl onnx-b64-graph-streams2 --model $M/onnx --device cuda:0 --batch-size 64 --streams 2
tl onnx-b64-graph-streams4 --model $M/onnx --device cuda:0 --batch-size 64 --streams 4
tl onnx-b64-host-streams2 --model $M/onnx --device cuda:0 --batch-size 64 --streams 2 --top-k-on host
tl onnx-b256-t16k-graph --model $M/onnx --device cuda:0 --batch-size 256 --batch-tokens 16384
tl onnx-b256-t16k-graph-streams2 --model $M/onnx --device cuda:0 --batch-size 256 --batch-tokens 16384 --streams 2
tl onnx-b64-cpu-host --model $M/onnx --device cpu --threads 16 --batch-size 64
echo "== identical lines (of 500) against onnx-b64-host"
for f in $R/*.txt; do echo "$(basename $f .txt): $(paste -d'\t' $f $R/onnx-b64-host.txt | awk -F'\t' '$1==$2' | wc -l)"; done
echo "== bench_nmt --gpu --prepared"
timeout 330 python3 tools/bench/bench_nmt.py --gpu --prepared --paraforge $P 2>&1 | grep -v "Loading weights\|LOAD REPORT\|^Key\|^---\|MISSING\|^Notes\|^- MISSING\|^$\|sacremoses"
cp bench-out/nmt-gpu.json $OUT/nmt-gpu2.json 2>/dev/null
tar -czf $OUT/results2.tar.gz -C $R .
date -u
