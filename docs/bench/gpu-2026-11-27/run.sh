# GPU run of 2026-11-27 (one start): unpack what the staging calls left in
# /root/stage (xz: the onnxruntime-gpu 1.31.1 wheel's package, CUDA 12's
# cuBLAS for CTranslate2's wheel, the demo model's fp32/fp16 graphs,
# transformers checkpoint and CTranslate2 conversions; the CTranslate2
# 4.8.5 wheel) and the release paraforge this call carries (.gpuM), then
# probe.py and the demo job.
S=/root/stage; X=$S/x; R=$OUT; mkdir -p $X; cp .gpuP13/* $S/
cat $S/p.* | tar -x -C $S || { echo "staged pieces do not join"; exit 2; }
xz -dc $S/ortpy.tar.xz | tar -x -C $X || { echo "ort unpack failed"; exit 3; }
mkdir -p .cache/bench/demo-cs-en && xz -dc $S/models2.tar.xz | tar -x -C .cache/bench/demo-cs-en || exit 4
xz -dc .gpuM/paraforge.xz > $X/paraforge && chmod +x $X/paraforge || exit 5
NV=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
xz -dc $S/cublas.tar.xz | tar -x -C $S || echo "no cublas 12 (CTranslate2 will not run)"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site $S/ctranslate2-*.whl || echo "no ctranslate2 wheel"
export PYTHONPATH=$X:/tmp/site PYTHONUNBUFFERED=1
export LD_LIBRARY_PATH=$NV/cu13/lib:$NV/cudnn/lib:/usr/local/cuda-13.0/targets/x86_64-linux/lib:$S/nvidia/cublas/lib
export ORT_DYLIB_PATH=$X/onnxruntime/capi/libonnxruntime.so.1.31.1
P=$X/paraforge
timeout 450 bash docs/bench/gpu-2026-11-27/body.sh $P $R > $OUT/log.txt 2>&1; echo "body rc $?" >> $OUT/log.txt; cat $OUT/log.txt
