# The measuring half of run.sh (its output goes to $OUT/log.txt).
P=$1; R=$2
date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,memory.free --format=csv,noheader; nproc
python3 -c "import onnxruntime as o; print('onnxruntime', o.__version__, o.get_available_providers())"
echo "== probe"
timeout 300 python3 docs/bench/gpu-2026-11-27/probe.py $P $R/probe --repeats 2
echo "== the demo job on cuda:0 (fp16 graphs, default batch, 2 streams)"
sed -e 's#^dir = .*#dir = ".cache/bench/demo-cs-en/onnx-fp16"#' -e '/^batch_size/d' -e 's#^streams = .*#streams = 2#' \
    -e 's#^output = .*#output = "out/demo-gpu"#' -e 's#^local = .*#local = 1#' pipeline-configs/demo.toml > $R/demo-gpu.toml
( sleep 7; timeout 10 python3 -c "import urllib.request as u; open('$R/metrics.txt','wb').write(u.urlopen('http://127.0.0.1:9464/metrics').read()); open('$R/status.json','wb').write(u.urlopen('http://127.0.0.1:9464/status').read())" ) > /dev/null 2>&1 &
timeout 80 $P run --config $R/demo-gpu.toml --gpus 0 > $R/demo-log.txt 2>&1; echo "run rc $?"; tail -4 $R/demo-log.txt
grep 'sentences_per_second\|batch' $R/metrics.txt | head -6; ls out/demo-gpu 2>/dev/null | head; cat out/demo-gpu/_SUCCESS 2>/dev/null | head -c 300; echo
cd $R && tar -czf $OUT/outputs.tar.gz probe/*.txt probe/*.scores 2>/dev/null; rm -f probe/*.txt probe/*.scores probe/*.onnx
date -u
