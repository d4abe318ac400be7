// cohort::Mesh: ranks laid out on named axes (torch's init_device_mesh / DeviceMesh), with the process
// group of each axis for this rank: mesh.group("data") holds the ranks that differ from this one only
// in their "data" coordinate. Row-major over the ranks of a Comm, or at coordinates the caller gives
// (World::node_mesh: {node, local} from the launcher's node and local ranks).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cohort/comm.h"
#include "cohort/export.h"

COHORT_EXPORT_BEGIN
namespace cohort {

/// One axis of a Mesh: its name and how many ranks lie along it.
struct MeshDim {
  std::string name;
  int size = 1;
};

class Mesh {
 public:
  /// Row-major over `comm`'s ranks (the last axis varies fastest), like init_device_mesh. The product
  /// of the sizes must be comm.size(). Collective: every rank of `comm` builds the same mesh.
  Mesh(Comm& comm, std::vector<MeshDim> dims);
  /// This rank sits at `coordinate` (one entry per axis); every coordinate must be taken exactly once.
  static Mesh at_coordinates(Comm& comm, std::vector<MeshDim> dims, std::vector<int> coordinate);

  /// The group of ranks sharing this rank's coordinates on every other axis; its rank is the coordinate.
  Comm& group(const std::string& axis) const;
  std::shared_ptr<Comm> group_ptr(const std::string& axis) const;
  /// This rank's coordinate on `axis`.
  int coordinate(const std::string& axis) const;
  /// How many ranks lie along `axis`.
  int size(const std::string& axis) const;
  const std::vector<MeshDim>& dims() const { return dims_; }

 private:
  Mesh(std::vector<MeshDim> dims, std::vector<int> coordinate)
      : dims_(std::move(dims)), coordinate_(std::move(coordinate)) {}
  int axis_index(const std::string& axis) const;
  void make_groups(Comm& comm);

  std::vector<MeshDim> dims_;
  std::vector<int> coordinate_;
  std::vector<std::shared_ptr<Comm>> groups_;
};

}  // namespace cohort
COHORT_EXPORT_END
