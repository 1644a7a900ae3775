// Preprocesses images with transformers.js's Qwen2VLImageProcessor, the independent JS reference
// that tests/image/qwen2vl_parity.py compares runtime/image's Qwen2-VL preprocessing with.
// usage: node qwen2vl.mjs CASES.json
//   CASES.json is a JSON list of {"image": PNG path, "config": preprocessor_config.json path,
//   "out": path}. For each case, writes pixel_values (F32 [patches, 3*T*P*P], little-endian) to
//   `out` and prints one JSON line {"grid": [t, h, w], "resized": [height, width],
//   "dims": pixel_values dims}, or {"error": message} when the processor throws.
//
// transformers.js reads a config's missing keys differently from transformers (Python):
// resample defaults to 2 (bilinear, Python: 3 bicubic), do_normalize to off, do_resize to
// `size !== undefined` (Qwen's published configs have no `size`, so no resize at all), and
// image_mean / image_std to none. Keys the file leaves out are therefore filled with Python's
// Qwen2VLImageProcessor defaults before the processor is built, so that both references read
// the same file the same way; keys the file has are passed through untouched.
import fs from "node:fs";
import { Qwen2VLImageProcessor, RawImage } from "@huggingface/transformers";

const PYTHON_DEFAULTS = {
  do_resize: true,
  resample: 3,
  do_rescale: true,
  rescale_factor: 1 / 255,
  do_normalize: true,
  image_mean: [0.48145466, 0.4578275, 0.40821073],
  image_std: [0.26862954, 0.26130258, 0.27577711],
  do_convert_rgb: true,
  patch_size: 14,
  temporal_patch_size: 2,
  merge_size: 2,
};

function withPythonDefaults(config) {
  const out = { ...PYTHON_DEFAULTS, ...config };
  // Python: min_pixels / max_pixels override size, size overrides the defaults.
  out.min_pixels = config.min_pixels ?? config.size?.shortest_edge ?? 56 * 56;
  out.max_pixels = config.max_pixels ?? config.size?.longest_edge ?? 28 * 28 * 1280;
  return out;
}

const [casesPath] = process.argv.slice(2);
if (!casesPath) {
  console.error("usage: node qwen2vl.mjs CASES.json");
  process.exit(2);
}

const lines = [];
for (const c of JSON.parse(fs.readFileSync(casesPath, "utf8"))) {
  try {
    const config = withPythonDefaults(JSON.parse(fs.readFileSync(c.config, "utf8")));
    const processor = new Qwen2VLImageProcessor(config);
    const image = await RawImage.fromBlob(new Blob([fs.readFileSync(c.image)]));
    const { pixel_values, image_grid_thw, reshaped_input_sizes } = await processor(image);
    const data = Float32Array.from(pixel_values.data);
    fs.writeFileSync(c.out, Buffer.from(data.buffer, data.byteOffset, data.byteLength));
    lines.push(JSON.stringify({
      grid: Array.from(image_grid_thw.data, Number),
      resized: reshaped_input_sizes[0],
      dims: pixel_values.dims,
    }));
  } catch (e) {
    lines.push(JSON.stringify({ error: String(e?.message ?? e) }));
  }
}
process.stdout.write(lines.join("\n") + (lines.length ? "\n" : ""));
