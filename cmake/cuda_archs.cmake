# cuda_archs.cmake: the default CUDA architectures when CMAKE_CUDA_ARCHITECTURES is not
# given. The GPUs of this machine when nvidia-smi sees any (one architecture compiles in
# about half the time of two), else sm_90a (Hopper's warpgroup MMA, for the attention
# backward) and sm_80 (its code and PTX serve every other GPU from Ampere on). Compute
# capability 9.0 becomes 90a, which the warpgroup kernels need. The configure output says
# which was chosen; -DCMAKE_CUDA_ARCHITECTURES=... always wins. A GPU older than sm_80 keeps
# the default (the kernels need sm_80).
#
# Also runs as a script, for its test: cmake -DLB_NVIDIA_SMI=PROGRAM -P cuda_archs.cmake
# prints "archs: ..." with PROGRAM standing in for nvidia-smi.

function(lb_cuda_default_archs out)
  set(archs "")
  if(NOT DEFINED LB_NVIDIA_SMI)
    find_program(LB_NVIDIA_SMI nvidia-smi)
  endif()
  if(LB_NVIDIA_SMI)
    execute_process(COMMAND ${LB_NVIDIA_SMI} --query-gpu=compute_cap --format=csv,noheader
      OUTPUT_VARIABLE caps RESULT_VARIABLE rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(rc EQUAL 0)
      string(REPLACE "\n" ";" caps "${caps}")
      foreach(cap ${caps})
        string(STRIP "${cap}" cap)
        if(cap MATCHES "^([0-9]+)\\.([0-9]+)$")
          set(arch "${CMAKE_MATCH_1}${CMAKE_MATCH_2}")
          if(arch LESS 80)
            # older than Ampere: the kernels need sm_80, so keep the default
            set(archs "")
            break()
          endif()
          if(arch STREQUAL "90")
            set(arch "90a")
          endif()
          list(APPEND archs ${arch})
        endif()
      endforeach()
      list(REMOVE_DUPLICATES archs)
    endif()
  endif()
  if(archs)
    message(STATUS "CUDA architectures: ${archs} (the GPUs of this machine; "
      "-DCMAKE_CUDA_ARCHITECTURES=\"90a;80\" builds for others)")
  else()
    set(archs "90a;80")
    message(STATUS "CUDA architectures: 90a;80 (nvidia-smi sees no GPU; "
      "-DCMAKE_CUDA_ARCHITECTURES=N builds for one)")
  endif()
  set(${out} "${archs}" PARENT_SCOPE)
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  lb_cuda_default_archs(archs)
  message("archs: ${archs}")
endif()
