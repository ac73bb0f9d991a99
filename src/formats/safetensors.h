#pragma once
// safetensors files (single or sharded through model.safetensors.index.json), memory-mapped.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "formats/weight_source.h"

namespace tf {

class SafetensorsFile {
 public:
  // Parses and validates the header: length bounds, JSON object, dtypes, shapes, offsets
  // (inside the buffer, matching shape x dtype, not overlapping, covering it), names.
  explicit SafetensorsFile(const std::string& path);
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::string& path() const { return file_.path(); }

 private:
  MappedFile file_;
  std::map<std::string, TensorView> tensors_;
};

// All tensors of a folder: model.safetensors, or the shards an index names, or every *.safetensors.
class SafetensorsSet : public WeightSource {
 public:
  explicit SafetensorsSet(const std::string& folder);
  const TensorView* find(const std::string& name) const override;
  std::vector<std::string> names() const override;
  std::string describe() const override { return folder_; }

 private:
  std::string folder_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> index_;
};

}  // namespace tf
