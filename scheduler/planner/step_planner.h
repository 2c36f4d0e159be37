#ifndef DCP_SCHEDULER_PLANNER_STEP_PLANNER_H_
#define DCP_SCHEDULER_PLANNER_STEP_PLANNER_H_

// The planner's working state for one step, shared by its source files
// (planner.cc: the entry point and the emitted plan; step_sizing.cc: group
// sizes and recompute of each sequence; step_packing.cc: groups chosen and
// placed, short sequences filled in and the step time estimated;
// step_dealing.cc: short sequences dealt to ranks and the result refined;
// step_uniform.cc: the one-size candidates; step_ablation.cc: the passes and
// the even micro-steps of the ablation options).
// Private to the planner library.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "scheduler/planner/cost_model.h"
#include "scheduler/planner/plan.h"
#include "scheduler/planner/planner.h"

namespace dcp {
namespace planner_internal {

// A sequence of the step as the planner sees it.
struct Item {
  int64_t id = 0;
  double length = 0;
  double units = 0;  // attention units, CostModel::AttentionUnits(length)
};

// A contiguous run of ranks a group may occupy.
struct Block {
  int first = 0;
  bool intra = true;
};

// The (group size, Ulysses degree, recompute step) a long sequence runs
// with: u-way Ulysses inside a (p / u)-way ring.
struct GroupConfig {
  int p = 0;
  int u = 1;
  int k = 0;  // recompute = k / layers
  double dur_intra = 0;
  double dur_inter = 0;
  double area = 0;  // p * duration: GPU-seconds
  // GPU-seconds less what filling the spare capacity with short sequences
  // saves against running them in packs of their own.
  double fill_area = 0;
  double spare_tokens = 0;
  double fill_cost_per_token = 0;  // GPU-seconds per token riding along
};

struct LongTask {
  int item = 0;
  GroupConfig config;
  // Short sequences riding along in the group's spare memory.
  std::vector<int> extra;
  double tokens = 0;
  double units = 0;
  double dur_intra = 0;  // with the riders, on one node
  int first_rank = 0;
};

// A pack of short sequences on one rank. Its sequences form a linked list
// through Draft::next_item, so dealing allocates nothing per sequence.
struct Pack {
  double tokens = 0;
  double units = 0;
  int head = -1;
  int count = 0;
};

// Everything one candidate plan consists of before it becomes a StepPlan.
struct Draft {
  std::vector<LongTask> long_tasks;           // in execution order
  std::vector<std::vector<Pack>> rank_packs;  // short packs of each rank
  std::vector<double> finish;                 // predicted finish per rank
  std::vector<int> short_items;               // longest first
  std::vector<int> next_item;                 // pack lists, -1 ends one
  double makespan = std::numeric_limits<double>::infinity();
  // The groups as chosen, before filling and placement: (item, p, k) of
  // each, in item order. Drafts with equal groups and equal riders are the
  // same plan.
  std::vector<int> groups;
  bool uniform = false;  // a uniform candidate (BuildUniform)
  bool fill = false;     // built with filling
  bool filled = false;   // some short sequence rides in a group
  // An earlier draft this one equals (-1: none): it is neither placed nor
  // finished, since it would plan exactly as that one does.
  int same_as = -1;
};

// A winner tree over the ranks' finish times: the least (or, with
// kMost, the most) loaded rank in O(1) and an update in O(log W), with keys
// stored in the nodes so that a level costs one comparison of neighbours.
template <bool kMost>
class RankTree {
 public:
  explicit RankTree(const std::vector<double>& finish) {
    const int n = static_cast<int>(finish.size());
    leaves_ = 1;
    while (leaves_ < n) leaves_ *= 2;
    node_.assign(2 * leaves_, Node{kMost ? -kInf : kInf, -1});
    for (int r = 0; r < n; ++r) node_[leaves_ + r] = Node{finish[r], r};
    for (int k = leaves_ - 1; k >= 1; --k)
      node_[k] = Win(node_[2 * k], node_[2 * k + 1]);
  }
  /// The winning rank (ties: the lowest).
  int Top() const { return node_[1].rank; }
  /// Up to `k` candidates: the winner, then the winners of the largest rank
  /// ranges that do not contain it.
  int Candidates(int k, int* out) const {
    int n = 0;
    out[n++] = node_[1].rank;
    for (int v = 1; n < k && v < leaves_;) {
      const bool in_left = node_[2 * v].rank == node_[v].rank;
      const int other = node_[in_left ? 2 * v + 1 : 2 * v].rank;
      if (other >= 0) out[n++] = other;
      v = in_left ? 2 * v : 2 * v + 1;
    }
    return n;
  }
  void Set(int rank, double finish) {
    int k = leaves_ + rank;
    node_[k].key = finish;
    for (k /= 2; k >= 1; k /= 2) node_[k] = Win(node_[2 * k], node_[2 * k + 1]);
  }

 private:
  static constexpr double kInf = std::numeric_limits<double>::infinity();
  struct Node {
    double key;
    int rank;
  };
  // `a` is the left (lower ranks) child, so ties keep the lower rank. Padding
  // leaves past the last rank hold a key that never wins, so they need no
  // test of their own.
  static Node Win(const Node& a, const Node& b) {
    return (kMost ? b.key > a.key : b.key < a.key) ? b : a;
  }
  int leaves_ = 1;
  std::vector<Node> node_;
};

class StepPlanner {
 public:
  StepPlanner(const CostModel& model, const PlannerOptions& options,
              const std::vector<int>& sizes, PlanPhaseObserver* observer)
      : model_(model),
        options_(options),
        all_sizes_(sizes),
        sizes_(sizes),
        observer_(observer),
        world_(options.world_size),
        layers_(model.model().layers),
        node_(model.gpus_per_node()) {
    // The Ulysses degrees any group may use, descending (BestUlysses's
    // order): the head count's divisors.
    const int heads = model.model().heads;
    for (int u = heads; u >= 1; --u) {
      if (heads % u == 0) head_divisors_.push_back(u);
    }
  }

  absl::StatusOr<StepPlan> Plan(int64_t step, absl::Span<const int64_t> samples,
                                const LengthView& lengths);

 private:
  void Enter(PlanPhase phase) const {
    if (observer_ != nullptr) observer_->Enter(phase);
  }
  double Recompute(int k) const { return static_cast<double>(k) / layers_; }
  // Smallest recompute step whose token capacity holds `tokens_per_gpu`, or
  // -1 when none does.
  int MinRecompute(double tokens_per_gpu) const {
    auto it = std::lower_bound(max_tokens_.begin(), max_tokens_.end(),
                               tokens_per_gpu);
    return it == max_tokens_.end() ? -1
                                   : static_cast<int>(it - max_tokens_.begin());
  }
  double PackCost(double tokens, double units) const {
    return tokens <= 0 ? 0.0
                       : model_.TaskSecondsFromSums(1, true, tokens, units,
                                                    short_recompute_);
  }
  // Cost a short item adds to a pack that already exists.
  double ItemCost(const Item& it) const {
    return PackCost(it.length, it.units) - pack_overhead_;
  }
  static void AddToPack(int i, const Item& it, Pack* pack, Draft* d) {
    pack->tokens += it.length;
    pack->units += it.units;
    d->next_item[i] = pack->head;
    pack->head = i;
    ++pack->count;
  }

  // The step's samples and their lengths (read_lengths_), checked against
  // the length table.
  absl::Status ReadItems(int64_t step, absl::Span<const int64_t> samples,
                         const LengthView& lengths, double* total_tokens);
  // Sorts the items and sizes them: capacities, the short pack config and
  // the group configs of the candidates.
  absl::Status SizeItems(int64_t step);
  // SizeItems' parts: the items sorted with their capacities, then (once per
  // pass: `fixed_k_` and `sizes_` set) the short pack config and the group
  // configs.
  absl::Status MeasureItems();
  absl::Status SizeForPass(int64_t step);

  // The fastest candidate so far: a draft, compared by its makespan, or,
  // with even micro-steps, the plan it becomes, compared by its prediction.
  struct Best {
    std::optional<Draft> draft;
    std::optional<StepPlan> plan;
    PlanOrigin origin = PlanOrigin::kUnknown;
    double short_recompute = 0;  // of the draft's packs: its pass's
    double makespan = std::numeric_limits<double>::infinity();  // no sync
  };
  // Keeps `d` in `best` when it is faster (ties: the one already kept).
  void Consider(int64_t step, double total_tokens, Draft d, PlanOrigin origin,
                Best* best) const;
  // The search's best draft for the current pass (the drafts of every
  // split threshold, the most promising finished).
  Draft Search() const;
  // Plan with an ablation option on: passes over recompute ratios and group
  // sizes, each candidate considered.
  absl::StatusOr<StepPlan> PlanAblation(int64_t step, double total_tokens);
  // The recompute steps the passes run with (-1: per task).
  absl::StatusOr<std::vector<int>> RecomputePasses(int64_t step) const;
  // Splits packs of short sequences until every rank runs as many tasks as
  // the busiest one (see PlannerOptions::even_micro_steps), then predicts.
  void EvenMicroSteps(StepPlan* plan) const;
  // The cost model's step time of `plan` (tasks in order, each starting when
  // its ranks are free), sync included.
  double Predict(const StepPlan& plan) const;
  // Finishes the drafts most likely to win (see PlannerOptions) and returns
  // the index of the fastest.
  int FinishMostPromising(std::vector<Draft>* drafts) const;
  // items_ from samples_ and read_lengths_, longest first.
  void SortByLength();
  void ChooseShortPackConfig();
  absl::Status ComputeGroupConfigs();
  absl::Status AddGroupConfigs(int i);
  GroupConfig MakeConfig(const Item& it, int p, int k) const;
  // Whether the planner runs groups of p as u-way Ulysses: the whole group,
  // or subgroups whose placement the cost model knows (groups start on
  // multiples of their size, so subgroups of a u dividing a node never
  // straddle nodes, and those of a u larger than a node always do).
  bool RunsUlysses(int p, int u) const {
    return u == p || node_ % u == 0 || u > node_;
  }
  // The Ulysses degree (dividing the heads and p) under which a task of
  // `tokens` and `units` on p GPUs runs fastest at recompute step k; its
  // time (links as for a group within a node when p fits one) in
  // `*seconds` when given.
  int BestUlysses(int p, double tokens, double units, int k,
                  double* seconds = nullptr) const;
  // The one Ulysses degree of the uniform candidate of p: the best for the
  // step's longest sequence at the least recompute that holds it.
  int UniformUlysses(int p) const;
  std::vector<Block> BlocksOf(int p) const;
  // Splits the sequences into groups and short ones for a split threshold,
  // places the groups and estimates the step time (`WaterLevel`).
  // A draft that equals one of `built` is only marked `same_as` it, with
  // its estimate.
  Draft Build(double limit, bool fill, const std::vector<Draft>& built) const;
  // The first of `built` (not itself a copy) that plans exactly as `d`, or
  // -1: equal groups, and either both built alike or, when `unfilled` (`d`
  // has no riders), one without riders.
  static int SameAs(const Draft& d, const std::vector<Draft>& built,
                    bool unfilled);
  // Build's parts: which candidates become groups (the rest joins
  // `short_items`), then where each group runs.
  void ChooseGroups(double limit, bool fill, std::vector<int>* short_items,
                    Draft* d) const;
  void PlaceGroups(Draft* d) const;
  // Places long_tasks[begin, end), all of one group size, in order.
  void PlaceGroupsOfSize(size_t begin, size_t end, Draft* d) const;
  double WaterLevel(const Draft& d) const;
  // Deals the short sequences and refines: the draft's exact step time.
  void Finish(Draft* d) const;
  void Fill(std::vector<int>* short_items, Draft* d) const;
  double LongDuration(const LongTask& t, bool intra) const {
    return model_.TaskSecondsFromSums(t.config.p, intra, t.tokens, t.units,
                                      Recompute(t.config.k), t.config.u);
  }
  void Deal(const std::vector<int>& short_items, Draft* d) const;
  void Refine(Draft* d) const;
  // Every sequence on groups of `p` ranks (packed first fit, the packs dealt
  // longest first to the group that finishes first): the layout a static
  // plan of size p would run, with its exact step time. Nothing when a
  // sequence fits no group of p or p does not divide the world.
  std::optional<Draft> BuildUniform(int p) const;
  // Replaces `best` by the fastest uniform draft that beats it, if any:
  // never worse than one group size for every sequence, as this cost
  // model sees them.
  void KeepUniformIfFaster(double total_tokens, Draft* best) const;
  // The same over `Best` (which may hold nothing yet).
  void ConsiderUniform(int64_t step, double total_tokens, Best* best) const;
  // A step time no uniform draft of p can beat (either placement of its
  // groups, inside a node or across).
  double UniformBound(int p, double total_tokens, double total_units) const;
  StepPlan Emit(int64_t step, const Draft& d, double total_tokens) const;

  const CostModel& model_;
  const PlannerOptions& options_;
  const std::vector<int>& all_sizes_;  // every size the planner may use
  absl::Span<const int> sizes_;        // those of the current pass
  PlanPhaseObserver* const observer_;  // may be null
  const int world_;
  const int layers_;
  const int node_;
  std::vector<int> head_divisors_;  // descending

  absl::Span<const int64_t> samples_;   // the step's samples, as given
  LengthView lengths_;                  // their length table
  std::vector<uint32_t> read_lengths_;  // their lengths, in that order
  std::vector<Item> items_;             // the step's sequences, longest first
  std::vector<double> prefix_tokens_;   // tokens of items_[0, i)
  std::vector<double> max_tokens_;      // per recompute step k
  int fixed_k_ = -1;  // the recompute step of every task, or -1: per task
  int short_k_ = 0;
  double short_recompute_ = 0;
  double short_cap_ = 0;
  double pack_overhead_ = 0;
  double short_cost_per_token_ = 0;  // in a full short pack, overhead shared
  // Group configurations of the longest sequences: Configs(i) belongs to
  // items_[i], i < configs_.size(); every later sequence always goes into a
  // short pack. configs_[i] is the range of config_pool_ holding them; equal
  // lengths share one range.
  struct ConfigRange {
    int begin = 0;
    int end = 0;
  };
  absl::Span<const GroupConfig> Configs(int i) const {
    return absl::MakeConstSpan(config_pool_.data() + configs_[i].begin,
                               config_pool_.data() + configs_[i].end);
  }
  std::vector<GroupConfig> config_pool_;
  std::vector<ConfigRange> configs_;
  std::vector<double> single_dur_;  // per item, alone in a short pack
  std::vector<double> item_cost_;   // per item, added to an open short pack
  double mean_load_ = 0;
  // Sums over the sequences past the group candidates (always short).
  double tail_cost_ = 0;
  double tail_tokens_ = 0;
};

}  // namespace planner_internal
}  // namespace dcp

#endif  // DCP_SCHEDULER_PLANNER_STEP_PLANNER_H_
