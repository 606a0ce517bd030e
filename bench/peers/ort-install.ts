// How to install onnxruntime-node for the bench, outside the project's dependencies (its postinstall would
// otherwise try to download CUDA libraries). A module of its own so that printing it loads no runtime.

export const ORT_NODE_INSTALL =
  'ONNXRUNTIME_NODE_INSTALL=skip npm install --prefix bench/.peers onnxruntime-node@1.30.0';
