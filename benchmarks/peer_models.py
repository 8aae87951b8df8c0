"""Model folders for the peer servers (run in .venv-peers by `make peers`): sentence-transformers' MiniLM as
infinity-emb's ONNX Runtime engine reads it, float32 and 8-bit (and a cross-encoder, for its /rerank), made the way a user would make them
(optimum's exporter; optimum's quantizer with its dynamic per-channel int8 configuration for this CPU).

    .venv-peers/bin/python benchmarks/peer_models.py --model ST_DIR --out build/peers
    .venv-peers/bin/python benchmarks/peer_models.py --cross-encoder CE_DIR --out build/peers/NAME
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path


def cross_encoder(source: Path, out: Path) -> None:
    """A CrossEncoder folder as infinity-emb's ONNX Runtime engine reads it for /rerank: optimum's
    text-classification export, optimized as the embedding model is (see main), at the folder's top."""
    from optimum.onnxruntime import ORTOptimizer
    from optimum.onnxruntime.configuration import OptimizationConfig

    export = out.parent / f"{out.name}-export"
    for folder in (out, export):
        shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(source, out)
    subprocess.run(
        [
            str(Path(sys.executable).parent / "optimum-cli"),
            "export",
            "onnx",
            "--model",
            str(source),
            "--task",
            "text-classification",
            str(export),
        ],
        check=True,
    )
    ORTOptimizer.from_pretrained(export, file_names=["model.onnx"]).optimize(
        OptimizationConfig(optimization_level=99, optimize_for_gpu=False), save_dir=export / "optimized"
    )
    shutil.copy(export / "optimized" / "model_optimized.onnx", out / "model.onnx")
    shutil.rmtree(export)
    print(f"peer cross-encoder: {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="the sentence-transformers model folder")
    parser.add_argument("--cross-encoder", type=Path, help="instead: a CrossEncoder folder, for /rerank")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.cross_encoder:
        cross_encoder(args.cross_encoder, args.out)
        return
    fp32, int8, export = args.out / "minilm-fp32", args.out / "minilm-int8", args.out / "export"
    for folder in (fp32, int8, export):
        shutil.rmtree(folder, ignore_errors=True)
    for folder in (fp32, int8):
        shutil.copytree(args.model, folder)
    subprocess.run(
        [
            str(Path(sys.executable).parent / "optimum-cli"),
            "export",
            "onnx",
            "--model",
            str(args.model),
            "--task",
            "feature-extraction",
            str(export),
        ],
        check=True,
    )

    from optimum.onnxruntime import ORTOptimizer, ORTQuantizer
    from optimum.onnxruntime.configuration import AutoQuantizationConfig, OptimizationConfig

    # infinity-emb optimizes the graph when it starts (ONNX Runtime's fusions, level 99), but its call no longer
    # fits optimum 2's OptimizationConfig and it falls back to the graph as given: so we give it the graph
    # optimized the same way. The graphs lie at the folder's top: infinity-emb 0.0.78 hands optimum 2 a file
    # path where it now wants a bare name, which works out only for a file at the top of a folder named by a
    # relative path (peer_servers.py runs it in the folder, as ".").
    ORTOptimizer.from_pretrained(export, file_names=["model.onnx"]).optimize(
        OptimizationConfig(optimization_level=99, optimize_for_gpu=False), save_dir=export / "optimized"
    )
    shutil.copy(export / "optimized" / "model_optimized.onnx", fp32 / "model.onnx")
    # infinity-emb picks a file named *quantize* on the CPU; avx512_vnni is the configuration of the
    # model_qint8_avx512_vnni.onnx that the model's own repository offers (dynamic, per channel, made from the
    # exported graph: the quantizer does not know the fused graph's operators).
    quantizer = ORTQuantizer.from_pretrained(export, file_name="model.onnx")
    config = AutoQuantizationConfig.avx512_vnni(is_static=False, per_channel=True)
    quantizer.quantize(save_dir=export / "quantized", quantization_config=config)
    shutil.copy(export / "quantized" / "model_quantized.onnx", int8 / "model_quantized.onnx")
    shutil.rmtree(export)
    print(f"peer models: {fp32} {int8}")


if __name__ == "__main__":
    main()
