"""Mistakes fail where they are made, with a message that names them."""

from __future__ import annotations

import pytest
import tvm
from tvm import relax

import tenet_byoc
from ledger_testing import mlp_executable
from tenet_byoc import Accelerator
from tenet_byoc import cost_model as cm
from tenet_byoc.models.mlp import mlp_module


def test_unknown_preset_name():
    with pytest.raises(ValueError, match=r"unknown accelerator preset 'os17' \(did you mean 'os16'\?\); available: .*os16"):
        tenet_byoc.build(mlp_module(), accelerator="os17")


def test_dataflow_mapping_outside_the_array():
    hw = cm.Hardware.systolic(4, 4)
    with pytest.raises(ValueError, match=r"accelerator 'bad'.*outside Hardware.pe_domain"):
        Accelerator("bad", hw, cm.Dataflow.preset("os", rows=8, cols=8))
    df = cm.Dataflow(space="{S[i,j,k]->PE[i%8, j%4]}",
                     time="{S[i,j,k]->T[floor(i/8), floor(j/4), i%8+j%4+k]}", name="wide")
    with pytest.raises(ValueError, match=r"dataflow 'wide' does not run on hardware"):
        Accelerator("custom", hw, df)


def test_zero_bandwidth():
    base = cm.Hardware.systolic(4, 4)
    with pytest.raises(ValueError, match=r"Hardware.bandwidth_bits must be a positive .* got 0"):
        cm.Hardware(pe_domain=base.pe_domain, interconnect=base.interconnect, bandwidth_bits=0)
    with pytest.raises(ValueError, match=r"bandwidth_bits must be a positive"):
        Accelerator.systolic("os", 4, 4, bandwidth_bits=0)


@pytest.fixture(scope="module")
def tvm_only_vm():
    return relax.VirtualMachine(tenet_byoc.build(mlp_module(), offload=False), tvm.cpu())


def test_ledger_query_without_a_tenet_module(tvm_only_vm):
    with pytest.raises(ValueError, match="VirtualMachine has no tenet runtime module"):
        tenet_byoc.ledger(tvm_only_vm)
    with pytest.raises(ValueError, match="has no tenet runtime module"):
        tenet_byoc.set_charging(tvm_only_vm, False)
    with pytest.raises(TypeError, match="expected a relax.VirtualMachine"):
        tenet_byoc.ledger("main")


def test_profile_without_a_tenet_module():
    ex = tenet_byoc.build(mlp_module(), offload=False)
    with pytest.raises(ValueError, match="has no tenet runtime module"):
        tenet_byoc.VirtualMachine(ex, tvm.cpu(), profile=True)


def test_profile_on_a_vm_made_without_profile():
    _, ex = mlp_executable()
    vm = tenet_byoc.VirtualMachine(ex, tvm.cpu())
    with pytest.raises(AttributeError, match="profile=False"):
        vm.profile("main", None)


def test_the_old_hardware_argument_is_refused_by_name():
    with pytest.raises(TypeError, match="hardware"):
        tenet_byoc.build(mlp_module(), hardware="os16")
