"""TFDS source without TensorFlow: mock_data, a real array_record dir, and errors."""

import importlib.util
import io

import numpy as np
import pytest

from fedjax_dp.data.sources import tfds_source
from fedjax_dp.data.sources.errors import DatasetNotAvailableError
from fedjax_dp.validation import FedJaxDpError

tfds = pytest.importorskip("tensorflow_datasets")

NO_TF = importlib.util.find_spec("tensorflow") is None


@pytest.mark.parametrize("policy", ["USE_CODE", "AUTO"])
@pytest.mark.parametrize("name,shape,classes", [
    ("mnist", (28, 28, 1), 10), ("fashion_mnist", (28, 28, 1), 10),
    ("cifar10", (32, 32, 3), 10), ("emnist/balanced", (28, 28, 1), 47),
    ("emnist/byclass", (28, 28, 1), 62),
])
def test_mock_data_all_datasets(policy, name, shape, classes):
  with tfds.testing.mock_data(num_examples=12, policy=getattr(tfds.testing.MockPolicy,
                                                                policy)):
    d = tfds_source.load_tfds(name)
  assert d.train_x.shape == (12,) + shape and d.test_x.shape == (12,) + shape
  assert d.train_x.dtype == np.float32 and d.train_y.dtype == np.int32
  assert 0.0 <= d.train_x.min() and d.train_x.max() <= 1.0
  assert d.train_x.max() > 0.5  # random uint8 images scaled, not left at 0..255 or zeros
  assert d.num_classes == classes
  assert d.train_y.min() >= 0 and d.train_y.max() < classes
  assert name in d.source and not d.is_subset


def test_emnist_images_are_transposed_back():
  image = np.zeros((28, 28, 1), np.uint8)
  image[0, 5] = 255  # stored (transposed) at row 0, column 5

  def fake_source(self, split, **kwargs):
    del self, split, kwargs
    return [{"image": image, "label": np.int64(3)}] * 2

  with tfds.testing.mock_data(as_data_source_fn=fake_source):
    d = tfds_source.load_tfds("emnist/balanced")
  assert d.train_x[0, 5, 0, 0] == 1.0 and d.train_x[0, 0, 5, 0] == 0.0
  np.testing.assert_array_equal(d.train_y, [3, 3])


def test_not_prepared_is_a_clear_error(tmp_path):
  d = str(tmp_path / "empty")
  assert not tfds_source.is_prepared("cifar10", d)
  with pytest.raises(DatasetNotAvailableError) as e:
    tfds_source.load_tfds("cifar10", data_dir=d)
  msg = str(e.value)
  assert "'cifar10' is not prepared in" in msg and d in msg
  assert "never downloads" in msg and "file_format='array_record'" in msg


def test_name_mapping():
  assert tfds_source.tfds_name_for("emnist") == "emnist/balanced"
  assert tfds_source.tfds_name_for("emnist", "byclass") == "emnist/byclass"
  with pytest.raises(FedJaxDpError, match="config must be one of 'byclass'"):
    tfds_source.tfds_name_for("emnist", "bad")
  with pytest.raises(FedJaxDpError, match="only valid for emnist"):
    tfds_source.tfds_name_for("cifar10", "balanced")


@pytest.fixture(scope="module")
def prepared_array_record_dir(tmp_path_factory):
  """A tiny image dataset really prepared in array_record format, without TensorFlow.

  TFDS encodes PNGs with tf.image when preparing, so (test only) the encoder is
  replaced by PIL; reading back then exercises the real, TF-free read path.
  """
  from tensorflow_datasets.core.features import image_feature
  pil = pytest.importorskip("PIL.Image")
  encoder = getattr(image_feature, "_ImageEncoder", None)
  if encoder is None or not hasattr(encoder, "_encode_image"):
    pytest.skip("this tensorflow_datasets version has no _ImageEncoder to patch")

  def encode_png(self, np_image):
    del self
    buf = io.BytesIO()
    pil.fromarray(np_image[..., 0]).save(buf, format="PNG")
    return buf.getvalue()

  class FedjaxDpTinyImages(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
      return tfds.core.DatasetInfo(
          builder=self, supervised_keys=("image", "label"),
          features=tfds.features.FeaturesDict({
              "image": tfds.features.Image(shape=(28, 28, 1)),
              "label": tfds.features.ClassLabel(num_classes=10)}))

    def _split_generators(self, dl_manager):
      del dl_manager
      return {"train": self._generate_examples(30), "test": self._generate_examples(8)}

    def _generate_examples(self, n):
      for i in range(n):
        yield i, {"image": np.full((28, 28, 1), 5 * i, np.uint8), "label": i % 10}

  d = tmp_path_factory.mktemp("tfds")
  original = encoder._encode_image
  encoder._encode_image = encode_png
  try:
    FedjaxDpTinyImages(data_dir=str(d), file_format="array_record").download_and_prepare()
  finally:
    encoder._encode_image = original
  return str(d), "fedjax_dp_tiny_images"


def test_reads_real_array_record_dataset_without_tensorflow(prepared_array_record_dir):
  d, name = prepared_array_record_dir
  assert tfds_source.is_prepared(name, d)
  data = tfds_source.load_tfds(name, data_dir=d)
  assert data.train_x.shape == (30, 28, 28, 1) and data.test_x.shape == (8, 28, 28, 1)
  # Image i is constant 5*i with label i % 10: decode and labels must agree.
  ids = np.round(data.train_x[:, 3, 3, 0] * 255 / 5).astype(int)
  np.testing.assert_array_equal(np.sort(ids), np.arange(30))
  np.testing.assert_array_equal(data.train_y, ids % 10)
  assert np.all(data.train_x == data.train_x[:, :1, :1, :])  # constant images
  assert data.num_classes == 10 and "1.0.0" in data.source


@pytest.mark.skipif(not NO_TF, reason="TensorFlow is installed")
def test_tfrecord_format_without_tensorflow_is_a_clear_error(prepared_array_record_dir,
                                                             monkeypatch):
  d, name = prepared_array_record_dir
  builder = tfds.builder(name, data_dir=d)

  def not_random_access(*args, **kwargs):
    raise NotImplementedError("Random access data source for file format tfrecord")

  monkeypatch.setattr(type(builder), "as_data_source", not_random_access)
  monkeypatch.setattr(type(builder.info), "file_format",
                      property(lambda self: tfds.core.FileFormat.TFRECORD))
  with pytest.raises(FedJaxDpError, match="only TensorFlow can read"):
    tfds_source.load_tfds(name, data_dir=d)
