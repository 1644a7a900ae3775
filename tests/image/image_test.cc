// Unit tests for runtime/image: error cases and limits, truncation sweeps, round trips and
// resampling invariants. Pixel parity with PIL is in pil_parity.py.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

// jpeglib.h uses FILE and size_t without including their headers, so the order matters.
// clang-format off
#include <cstdio>
#include <jpeglib.h>
// clang-format on

#include "runtime/image/clip_preprocess.h"
#include "runtime/image/image.h"
#include "runtime/image/png_encode.h"
#include "runtime/image/resize.h"

namespace hap {
namespace {

namespace fs = std::filesystem;

::testing::AssertionResult Contains(std::string_view text, std::string_view fragment) {
  if (text.find(fragment) != std::string_view::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "\"" << text << "\" does not contain \"" << fragment << "\"";
}

RgbImage Pattern(int w, int h) {
  RgbImage img;
  img.width = w;
  img.height = h;
  img.pixels.resize(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      uint8_t* p = &img.pixels[(static_cast<size_t>(y) * w + x) * 3];
      p[0] = static_cast<uint8_t>(x * 255 / std::max(1, w - 1));
      p[1] = static_cast<uint8_t>(y * 255 / std::max(1, h - 1));
      p[2] = static_cast<uint8_t>((x * 7 + y * 13) % 256);
    }
  }
  return img;
}

// Gentle gradients: what JPEG reproduces well.
RgbImage Smooth(int w, int h) {
  RgbImage img;
  img.width = w;
  img.height = h;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      img.pixels.push_back(static_cast<uint8_t>(40 + 4 * x));
      img.pixels.push_back(static_cast<uint8_t>(128 + x - y));
      img.pixels.push_back(static_cast<uint8_t>(220 - 3 * y));
    }
  }
  return img;
}

struct JpegOptions {
  int quality = 90;
  bool gray = false;
  bool progressive = false;
  std::vector<jpeg_scan_info> scans;  // custom scan script, when non-empty
};

JpegOptions Progressive() {
  JpegOptions o;
  o.progressive = true;
  return o;
}

JpegOptions Gray() {
  JpegOptions o;
  o.gray = true;
  return o;
}

// Encodes with libjpeg directly (the code under test only decodes).
std::string EncodeJpeg(const RgbImage& img, const JpegOptions& opt = {}) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_compress(&cinfo);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buf, &size);
  cinfo.image_width = img.width;
  cinfo.image_height = img.height;
  cinfo.input_components = opt.gray ? 1 : 3;
  cinfo.in_color_space = opt.gray ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, opt.quality, TRUE);
  if (opt.progressive) jpeg_simple_progression(&cinfo);
  if (!opt.scans.empty()) {
    cinfo.scan_info = opt.scans.data();
    cinfo.num_scans = static_cast<int>(opt.scans.size());
  }
  jpeg_start_compress(&cinfo, TRUE);
  std::vector<uint8_t> row(static_cast<size_t>(img.width) * 3);
  while (cinfo.next_scanline < cinfo.image_height) {
    const uint8_t* src = &img.pixels[static_cast<size_t>(cinfo.next_scanline) * img.width * 3];
    for (int x = 0; x < img.width; ++x) {
      if (opt.gray) {
        row[x] = src[x * 3];
      } else {
        std::copy_n(src + x * 3, 3, &row[x * 3]);
      }
    }
    JSAMPROW r = row.data();
    jpeg_write_scanlines(&cinfo, &r, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::string out(reinterpret_cast<char*>(buf), size);
  free(buf);
  return out;
}

std::string Png(const RgbImage& img) {
  auto png = EncodePng(img);
  EXPECT_TRUE(png.ok()) << png.status();
  return png.ok() ? *png : std::string();
}

// A PNG made of an IHDR (w x h, 8-bit RGB) and IEND only, with correct CRCs.
std::string HeaderOnlyPng(uint32_t w, uint32_t h) {
  // IHDR and IEND CRCs computed by zlib's crc32 polynomial (bitwise, to avoid a zlib dep).
  auto crc = [](const std::string& data) {
    uint32_t c = 0xFFFFFFFFu;
    for (unsigned char b : data) {
      c ^= b;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return c ^ 0xFFFFFFFFu;
  };
  auto be32 = [](uint32_t v) {
    return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                       static_cast<char>(v >> 8), static_cast<char>(v)};
  };
  auto chunk = [&](const std::string& tag, const std::string& data) {
    return be32(static_cast<uint32_t>(data.size())) + tag + data + be32(crc(tag + data));
  };
  const std::string ihdr = be32(w) + be32(h) + std::string("\x08\x02\x00\x00\x00", 5);
  return std::string("\x89PNG\r\n\x1A\n", 8) + chunk("IHDR", ihdr) + chunk("IEND", "");
}

void ExpectError(const absl::StatusOr<RgbImage>& got, absl::StatusCode code,
                 const std::vector<std::string>& fragments) {
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), code) << got.status();
  for (const std::string& f : fragments) {
    EXPECT_TRUE(Contains(std::string(got.status().message()), f));
  }
}

// ---------------------------------------------------------------------------------------------
// Format sniffing and limits

TEST(DecodeImageTest, EmptyInput) {
  ExpectError(DecodeImage("", {}), absl::StatusCode::kInvalidArgument, {"image is empty"});
}

TEST(DecodeImageTest, KnownUnsupportedFormats) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"GIF89a\x01\x00\x01\x00", "GIF"},
      {"GIF87a....", "GIF"},
      {"BM\x3a\x00\x00\x00\x00\x00", "BMP"},
      {std::string("RIFF\x24\x00\x00\x00WEBPVP8 ", 16), "WebP"},
      {std::string("II*\0\x08\0\0\0", 8), "TIFF"},
  };
  for (const auto& [bytes, name] : cases) {
    ExpectError(DecodeImage(bytes, {}), absl::StatusCode::kInvalidArgument,
                {"unsupported image format", name, "JPEG, PNG"});
  }
}

TEST(DecodeImageTest, UnrecognisedBytesAreNamed) {
  ExpectError(DecodeImage("<html><body>", {}), absl::StatusCode::kInvalidArgument,
              {"unsupported image format", "3c 68 74 6d 6c 3e 3c 62", "JPEG, PNG"});
  ExpectError(DecodeImage(std::string("\xFF\xD8", 2), {}), absl::StatusCode::kInvalidArgument,
              {"unsupported image format", "ff d8"});
}

TEST(DecodeImageTest, MaxBytes) {
  const std::string png = Png(Pattern(20, 10));
  ImageLimits limits;
  limits.max_bytes = static_cast<int64_t>(png.size()) - 1;
  ExpectError(DecodeImage(png, limits), absl::StatusCode::kResourceExhausted,
              {std::to_string(png.size()) + " bytes", std::to_string(png.size() - 1)});
  limits.max_bytes = static_cast<int64_t>(png.size());
  EXPECT_TRUE(DecodeImage(png, limits).ok());
}

TEST(DecodeImageTest, MaxPixels) {
  ImageLimits limits;
  limits.max_pixels = 64 * 48 - 1;
  ExpectError(DecodeImage(Png(Pattern(64, 48)), limits), absl::StatusCode::kResourceExhausted,
              {"64x48", "3072 pixels", "3071"});
  ExpectError(DecodeImage(EncodeJpeg(Pattern(64, 48)), limits),
              absl::StatusCode::kResourceExhausted, {"JPEG", "64x48", "3071"});
  limits.max_pixels = 64 * 48;
  EXPECT_TRUE(DecodeImage(Png(Pattern(64, 48)), limits).ok());
  EXPECT_TRUE(DecodeImage(EncodeJpeg(Pattern(64, 48)), limits).ok());
}

// The pixel limit comes from the header, before any pixel data is needed: these files have
// none, so any attempt to decode first would fail differently (or allocate 30 GB).
TEST(DecodeImageTest, MaxPixelsCheckedFromHeader) {
  ExpectError(DecodeImage(HeaderOnlyPng(100000, 100000), {}), absl::StatusCode::kResourceExhausted,
              {"PNG", "100000x100000", "40000000"});
  // Found by tests/fuzz/image_fuzz: 32-bit sizes whose product passes 2^63 overflowed the check.
  ExpectError(DecodeImage(HeaderOnlyPng(0xF1F1F1F1u, 0xF1F1F1F1u), {}),
              absl::StatusCode::kResourceExhausted,
              {"PNG", "4059165169x4059165169", "16476821869222798561 pixels"});

  std::string jpeg = EncodeJpeg(Pattern(16, 16));
  // Patch the SOF0 frame header: FFC0, length(2), precision(1), height(2), width(2).
  const size_t sof = jpeg.find("\xFF\xC0");
  ASSERT_NE(sof, std::string::npos);
  jpeg[sof + 5] = '\xEA', jpeg[sof + 6] = '\x60';  // 60000
  jpeg[sof + 7] = '\xEA', jpeg[sof + 8] = '\x60';
  // The scan data is for 16x16: decoding it as 60000x60000 would hit a premature end of data
  // (after allocating gigabytes), so a ResourceExhausted proves the check came first.
  ExpectError(DecodeImage(jpeg, {}), absl::StatusCode::kResourceExhausted,
              {"JPEG", "60000x60000", "3600000000 pixels"});
}

// ReadImageSize: DecodeImage's size and checks from the header alone.
TEST(ReadImageSizeTest, EqualsTheDecodedSize) {
  const std::vector<std::string> files = {Png(Pattern(37, 21)), EncodeJpeg(Pattern(64, 48)),
                                          EncodeJpeg(Pattern(33, 70), Progressive()),
                                          EncodeJpeg(Pattern(15, 9), Gray())};
  for (const std::string& file : files) {
    absl::StatusOr<RgbImage> decoded = DecodeImage(file, {});
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    absl::StatusOr<ImageSize> size = ReadImageSize(file, {});
    ASSERT_TRUE(size.ok()) << size.status();
    EXPECT_EQ(size->width, decoded->width);
    EXPECT_EQ(size->height, decoded->height);
  }
  // A frame header saying 640x480 over the scan data of a 16x16 image: the header's size.
  std::string jpeg = EncodeJpeg(Pattern(16, 16));
  const size_t sof = jpeg.find("\xFF\xC0");
  ASSERT_NE(sof, std::string::npos);
  jpeg[sof + 5] = '\x01', jpeg[sof + 6] = '\xE0';  // height 480
  jpeg[sof + 7] = '\x02', jpeg[sof + 8] = '\x80';  // width 640
  absl::StatusOr<ImageSize> bare = ReadImageSize(jpeg, {});
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_EQ(bare->width, 640);
  EXPECT_EQ(bare->height, 480);
}

TEST(ReadImageSizeTest, RefusesWhatDecodeImageRefusesBeforeThePixels) {
  auto expect = [](const absl::StatusOr<ImageSize>& got, absl::StatusCode code,
                   const std::string& fragment) {
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), code) << got.status();
    EXPECT_TRUE(Contains(std::string(got.status().message()), fragment)) << got.status();
  };
  expect(ReadImageSize("", {}), absl::StatusCode::kInvalidArgument, "image is empty");
  expect(ReadImageSize("GIF89a\x01\x00\x01\x00", {}), absl::StatusCode::kInvalidArgument, "GIF");
  expect(ReadImageSize(HeaderOnlyPng(100000, 100000), {}), absl::StatusCode::kResourceExhausted,
         "100000x100000");
  ImageLimits limits;
  limits.max_pixels = 64 * 48 - 1;
  expect(ReadImageSize(EncodeJpeg(Pattern(64, 48)), limits), absl::StatusCode::kResourceExhausted,
         "64x48");
  // Cut inside the header: no size to give.
  const std::string jpeg = EncodeJpeg(Pattern(64, 48));
  expect(ReadImageSize(jpeg.substr(0, 40), {}), absl::StatusCode::kInvalidArgument, "JPEG");
  const std::string png = Png(Pattern(20, 10));
  expect(ReadImageSize(png.substr(0, 20), {}), absl::StatusCode::kInvalidArgument, "PNG");
}

// ---------------------------------------------------------------------------------------------
// Corrupt and truncated data

TEST(DecodeImageTest, CorruptPng) {
  std::string png = Png(Pattern(30, 20));
  const size_t idat = png.find("IDAT");
  ASSERT_NE(idat, std::string::npos);
  png[idat + 10] ^= 0x55;  // inside the compressed data: the chunk CRC no longer matches
  ExpectError(DecodeImage(png, {}), absl::StatusCode::kInvalidArgument, {"PNG"});

  std::string bad_header = Png(Pattern(30, 20));
  bad_header[16 + 8] = 7;  // bit depth 7 does not exist
  ExpectError(DecodeImage(bad_header, {}), absl::StatusCode::kInvalidArgument, {"PNG"});
}

TEST(DecodeImageTest, CorruptJpeg) {
  ExpectError(DecodeImage(std::string("\xFF\xD8\xFF\xE0garbage-garbage-garbage", 26), {}),
              absl::StatusCode::kInvalidArgument, {"JPEG"});
  std::string jpeg = EncodeJpeg(Pattern(32, 32));
  const size_t sof = jpeg.find("\xFF\xC0");
  jpeg[sof + 9] = 7;  // 7 components
  ExpectError(DecodeImage(jpeg, {}), absl::StatusCode::kInvalidArgument, {"JPEG"});
}

// Every prefix of a valid file: an error or an image, never a crash or a read past the end
// (this test matters most under ASan). Both decoders insist on the whole stream, so only the
// complete file decodes.
void TruncationSweep(const std::string& file, const char* format) {
  ASSERT_TRUE(DecodeImage(file, {}).ok()) << format;
  for (size_t n = 0; n < file.size(); ++n) {
    const std::string prefix = file.substr(0, n);  // own allocation: ASan sees overreads
    auto got = DecodeImage(prefix, {});
    ASSERT_FALSE(got.ok()) << format << " prefix of " << n << " bytes decoded";
    ASSERT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
  }
}

TEST(DecodeImageTest, TruncatedPngSweep) { TruncationSweep(Png(Pattern(23, 17)), "PNG"); }

TEST(DecodeImageTest, TruncatedJpegSweep) {
  TruncationSweep(EncodeJpeg(Pattern(23, 17)), "baseline JPEG");
  TruncationSweep(EncodeJpeg(Pattern(23, 17), Progressive()), "progressive JPEG");
  TruncationSweep(EncodeJpeg(Pattern(9, 12), Gray()), "grey JPEG");
}

TEST(DecodeImageTest, TooManyProgressiveScans) {
  // A legal grey progressive JPEG with 1 + 63 * 11 = 694 scans: each AC coefficient gets a
  // first scan at Al = 10 and ten refinement scans.
  std::vector<jpeg_scan_info> scans;
  scans.push_back({1, {0, 0, 0, 0}, 0, 0, 0, 0});
  for (int k = 1; k < 64; ++k) {
    scans.push_back({1, {0, 0, 0, 0}, k, k, 0, 10});
    for (int al = 9; al >= 0; --al) scans.push_back({1, {0, 0, 0, 0}, k, k, al + 1, al});
  }
  JpegOptions opt = Gray();
  opt.scans = scans;  // the custom script alone makes it progressive
  const std::string jpeg = EncodeJpeg(Pattern(16, 16), opt);
  ExpectError(DecodeImage(jpeg, {}), absl::StatusCode::kInvalidArgument, {"progressive scans"});
}

// ---------------------------------------------------------------------------------------------
// Successful decodes

TEST(DecodeImageTest, PngRoundTripIsExact) {
  const RgbImage img = Pattern(37, 19);
  auto got = DecodeImage(Png(img), {});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->width, 37);
  EXPECT_EQ(got->height, 19);
  EXPECT_EQ(got->pixels, img.pixels);
}

TEST(DecodeImageTest, JpegDecodesCloseToSource) {
  const RgbImage img = Smooth(40, 24);
  for (bool progressive : {false, true}) {
    JpegOptions opt;
    opt.quality = 98;
    opt.progressive = progressive;
    auto got = DecodeImage(EncodeJpeg(img, opt), {});
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->pixels.size(), img.pixels.size());
    int worst = 0;
    for (size_t i = 0; i < img.pixels.size(); ++i) {
      worst = std::max(worst, std::abs(got->pixels[i] - img.pixels[i]));
    }
    EXPECT_LE(worst, 6) << "progressive=" << progressive;
  }
  // Grey JPEG: three equal channels.
  auto gray = DecodeImage(EncodeJpeg(img, Gray()), {});
  ASSERT_TRUE(gray.ok()) << gray.status();
  for (size_t i = 0; i < gray->pixels.size(); i += 3) {
    ASSERT_EQ(gray->pixels[i], gray->pixels[i + 1]);
    ASSERT_EQ(gray->pixels[i], gray->pixels[i + 2]);
  }
}

// ---------------------------------------------------------------------------------------------
// Files

class ImageFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "hap-image-test-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string dir_;
};

TEST_F(ImageFileTest, ReadAndWrite) {
  const RgbImage img = Pattern(13, 29);
  const std::string path = dir_ + "/a.png";
  ASSERT_TRUE(WritePng(path, img).ok());
  auto got = ReadImageFile(path, {});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->pixels, img.pixels);

  ImageLimits small;
  small.max_bytes = 10;
  auto big = ReadImageFile(path, small);
  ExpectError(big, absl::StatusCode::kResourceExhausted, {path, "the limit is 10 bytes"});
}

TEST_F(ImageFileTest, Errors) {
  ExpectError(ReadImageFile(dir_ + "/missing.jpg", {}), absl::StatusCode::kNotFound,
              {dir_ + "/missing.jpg"});
  ExpectError(ReadImageFile(dir_, {}), absl::StatusCode::kInvalidArgument, {dir_});
  const std::string gif = dir_ + "/x.gif";
  std::ofstream(gif) << "GIF89a\x01\x00\x01\x00";
  ExpectError(ReadImageFile(gif, {}), absl::StatusCode::kInvalidArgument,
              {gif, "unsupported image format GIF"});
  const std::string empty = dir_ + "/empty.png";
  std::ofstream(empty).close();
  ExpectError(ReadImageFile(empty, {}), absl::StatusCode::kInvalidArgument,
              {empty, "image is empty"});
  absl::Status s = WritePng(dir_ + "/no/such/dir/x.png", Pattern(2, 2));
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(Contains(std::string(s.message()), dir_ + "/no/such/dir/x.png"));
}

TEST(EncodePngTest, RejectsInconsistentImages) {
  RgbImage bad = Pattern(4, 4);
  bad.pixels.pop_back();
  EXPECT_EQ(EncodePng(bad).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodePng(RgbImage{}).status().code(), absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// Resampling and preprocessing invariants (exactness against PIL is in pil_parity.py)

TEST(ResizeBicubicTest, ConstantStaysConstant) {
  RgbImage img;
  img.width = 17, img.height = 9;
  img.pixels.assign(17 * 9 * 3, 0);
  for (size_t i = 0; i < img.pixels.size(); i += 3) {
    img.pixels[i] = 200, img.pixels[i + 1] = 3, img.pixels[i + 2] = 255;
  }
  for (auto [w, h] : {std::pair{336, 100}, {5, 4}, {17, 50}, {1, 1}}) {
    const RgbImage out = ResizeBicubic(img, w, h);
    ASSERT_EQ(out.width, w);
    ASSERT_EQ(out.height, h);
    for (size_t i = 0; i < out.pixels.size(); i += 3) {
      ASSERT_EQ(out.pixels[i], 200);
      ASSERT_EQ(out.pixels[i + 1], 3);
      ASSERT_EQ(out.pixels[i + 2], 255);
    }
  }
}

TEST(ResizeBicubicTest, IdentityAndRegion) {
  const RgbImage img = Pattern(31, 22);
  EXPECT_EQ(ResizeBicubic(img, 31, 22).pixels, img.pixels);
  const RgbImage full = ResizeBicubic(img, 70, 45);
  const RgbImage part = ResizeBicubicRegion(img, 70, 45, 11, 7, 20, 30);
  ASSERT_EQ(part.width, 20);
  ASSERT_EQ(part.height, 30);
  for (int y = 0; y < 30; ++y) {
    for (int x = 0; x < 20 * 3; ++x) {
      ASSERT_EQ(part.pixels[y * 60 + x], full.pixels[(y + 7) * 70 * 3 + 33 + x]);
    }
  }
}

TEST(ResizeBicubicTest, BadArgumentsGiveEmptyImage) {
  const RgbImage img = Pattern(4, 4);
  EXPECT_EQ(ResizeBicubic(img, 0, 5).width, 0);
  EXPECT_EQ(ResizeBicubic(RgbImage{}, 5, 5).width, 0);
  EXPECT_EQ(ResizeBicubicRegion(img, 10, 10, 5, 0, 6, 1).width, 0);  // window past the edge
}

TEST(ClipPreprocessTest, WhiteImage) {
  RgbImage white;
  white.width = 50, white.height = 80;
  white.pixels.assign(50 * 80 * 3, 255);
  auto x = ClipPreprocess(white, 24);
  ASSERT_TRUE(x.ok()) << x.status();
  ASSERT_EQ(x->size(), 3u * 24 * 24);
  for (int c = 0; c < 3; ++c) {
    const float want = (1.0f - kClipMean[c]) / kClipStd[c];
    for (int i = 0; i < 24 * 24; ++i) ASSERT_EQ((*x)[c * 576 + i], want);
  }
}

TEST(ClipPreprocessTest, Errors) {
  EXPECT_EQ(ClipPreprocess(Pattern(4, 4), 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ClipPreprocess(RgbImage{}, 336).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ClipPreprocess(Pattern(4, 4), 5000).status().code(),
            absl::StatusCode::kInvalidArgument);
  // 7,000,000 x 1 at size 336: the long edge would be 2.35e9 pixels.
  RgbImage line;
  line.width = 7'000'000, line.height = 1;
  line.pixels.assign(size_t{7'000'000} * 3, 128);
  auto extreme = ClipPreprocess(line, 336);
  EXPECT_EQ(extreme.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(std::string(extreme.status().message()), "aspect ratio"));
}

TEST(ClipPreprocessTest, ExtremeAspectRatioStaysCheap) {
  // 40000 x 1 → resized to 13,440,000 x 336 in principle; only the 336 x 336 crop is computed.
  auto x = ClipPreprocess(Pattern(40000, 1), 336);
  ASSERT_TRUE(x.ok()) << x.status();
  EXPECT_EQ(x->size(), 3u * 336 * 336);
}

}  // namespace
}  // namespace hap
