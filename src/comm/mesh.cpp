// cohort::Mesh (see include/cohort/mesh.h). The group of axis a is one Comm::split: the color is this
// rank's coordinates on the other axes (linearized), the key its coordinate on a, so each group's ranks
// are ordered by that coordinate and every rank makes the groups in the same order (axis by axis).
#include "cohort/mesh.h"

#include <sstream>

#include "core/check.h"

namespace cohort {
namespace {

int64_t volume(const std::vector<MeshDim>& dims) {
  int64_t n = 1;
  for (const auto& d : dims) n *= d.size;
  return n;
}

std::string shape_of(const std::vector<MeshDim>& dims) {
  std::ostringstream out;
  for (size_t i = 0; i < dims.size(); ++i) out << (i ? " x " : "") << dims[i].name << "=" << dims[i].size;
  return out.str();
}

void check_dims(const std::vector<MeshDim>& dims, int comm_size) {
  COHORT_CHECK_KIND(kInvalidArgument, !dims.empty(), "Mesh: no axes given");
  for (size_t i = 0; i < dims.size(); ++i) {
    COHORT_CHECK_KIND(kInvalidArgument, dims[i].size >= 1, "Mesh: axis '", dims[i].name, "' has size ", dims[i].size,
                      " (accepted: >= 1)");
    COHORT_CHECK_KIND(kInvalidArgument, !dims[i].name.empty(), "Mesh: axis ", i, " has no name");
    for (size_t j = 0; j < i; ++j)
      COHORT_CHECK_KIND(kInvalidArgument, dims[j].name != dims[i].name, "Mesh: axis name '", dims[i].name,
                        "' is used twice");
  }
  COHORT_CHECK_KIND(kInvalidArgument, volume(dims) == comm_size, "Mesh: ", shape_of(dims), " holds ", volume(dims),
                    " ranks but the Comm has ", comm_size);
}

}  // namespace

Mesh::Mesh(Comm& comm, std::vector<MeshDim> dims) : dims_(std::move(dims)) {
  check_dims(dims_, comm.size());
  coordinate_.assign(dims_.size(), 0);
  int rest = comm.rank();
  for (int a = int(dims_.size()) - 1; a >= 0; --a) {  // row-major: the last axis varies fastest
    coordinate_[a] = rest % dims_[a].size;
    rest /= dims_[a].size;
  }
  make_groups(comm);
}

Mesh Mesh::at_coordinates(Comm& comm, std::vector<MeshDim> dims, std::vector<int> coordinate) {
  check_dims(dims, comm.size());
  COHORT_CHECK_KIND(kInvalidArgument, coordinate.size() == dims.size(), "Mesh: ", coordinate.size(),
                    " coordinates for ", dims.size(), " axes");
  int64_t linear = 0;
  for (size_t a = 0; a < dims.size(); ++a) {
    COHORT_CHECK_KIND(kInvalidArgument, coordinate[a] >= 0 && coordinate[a] < dims[a].size, "Mesh: coordinate ",
                      coordinate[a], " on axis '", dims[a].name, "' is outside 0..", dims[a].size - 1);
    linear = linear * dims[a].size + coordinate[a];
  }
  // Every place of the mesh taken exactly once: gather each rank's place and name the collisions.
  torch::Tensor places = comm.allgather(torch::tensor({linear}, torch::kLong)).view(-1);
  for (int r = 0; r < comm.size(); ++r)
    for (int q = 0; q < r; ++q)
      COHORT_CHECK_KIND(kInvalidArgument, places[r].item<int64_t>() != places[q].item<int64_t>(), "Mesh: ranks ",
                        comm.world_rank(q), " and ", comm.world_rank(r), " claim the same place of the ",
                        shape_of(dims), " mesh");
  Mesh mesh(std::move(dims), std::move(coordinate));
  mesh.make_groups(comm);
  return mesh;
}

void Mesh::make_groups(Comm& comm) {
  for (size_t a = 0; a < dims_.size(); ++a) {
    int color = 0;
    for (size_t b = 0; b < dims_.size(); ++b)
      if (b != a) color = color * dims_[b].size + coordinate_[b];
    groups_.push_back(comm.split(color, coordinate_[a], GroupOptions().name(dims_[a].name)));
  }
}

int Mesh::axis_index(const std::string& axis) const {
  for (size_t a = 0; a < dims_.size(); ++a)
    if (dims_[a].name == axis) return int(a);
  COHORT_CHECK_KIND(kInvalidArgument, false, "Mesh: no axis '", axis, "' in the ", shape_of(dims_), " mesh");
  return -1;
}

Comm& Mesh::group(const std::string& axis) const { return *groups_[axis_index(axis)]; }
std::shared_ptr<Comm> Mesh::group_ptr(const std::string& axis) const { return groups_[axis_index(axis)]; }
int Mesh::coordinate(const std::string& axis) const { return coordinate_[axis_index(axis)]; }
int Mesh::size(const std::string& axis) const { return dims_[axis_index(axis)].size; }

}  // namespace cohort
