// ember::amp::autocast: saves the thread's autocast state, sets the guard's,
// restores it (see ember/parallel/amp/autocast.h).
#include "ember/parallel/amp/autocast.h"

#include "ember/core/error.h"

namespace ember::amp {

autocast::autocast(DeviceType device_type, std::optional<DType> dtype, bool enabled, bool cache_enabled)
    : saved_(autocast_state::get_state()) {
  const DType d = dtype.value_or(saved_.dtype[size_t(device_type)]);
  EMBER_CHECK(d == DType::Float16 || d == DType::BFloat16,
              "amp::autocast: dtype " << dtype_name(d) << " is not a lower-precision floating dtype; autocast on "
                                      << Device(device_type).str() << " takes float16 or bfloat16");
  autocast_state::State s = saved_;
  s.enabled[size_t(device_type)] = enabled;
  s.dtype[size_t(device_type)] = d;
  s.cache_enabled = cache_enabled;
  autocast_state::set_state(s);
  autocast_state::enter_region();
}

autocast::~autocast() {
  autocast_state::set_state(saved_);
  autocast_state::exit_region();
}

bool is_autocast_enabled(DeviceType device_type) { return autocast_state::is_enabled(device_type); }
DType get_autocast_dtype(DeviceType device_type) { return autocast_state::lower_precision_dtype(device_type); }
void clear_autocast_cache() { autocast_state::clear_cache(); }

}  // namespace ember::amp
